"""The local trainer: one process, torch + peft (`backends.trainer = "local"`)."""
