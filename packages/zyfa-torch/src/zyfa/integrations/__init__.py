"""Adapters that plug ZYFA into other libraries (each imports its library only when used).

zyfa.integrations.transformers.register()   Hugging Face transformers: attn_implementation="zyfa"
"""
