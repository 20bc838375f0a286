"""Forge's LoRA-only checkpoint layout: PEFT adapter + critic weights + summary; export, strict
warm start and verification. Shared by both trainers (a verl checkpoint is written in this layout).
"""
