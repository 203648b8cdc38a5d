"""chat_templates"""
