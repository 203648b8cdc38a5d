"""llamacpp"""
