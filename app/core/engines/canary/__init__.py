"""canary"""
