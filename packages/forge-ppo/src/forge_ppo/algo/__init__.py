"""PPO math as pure functions: GAE, losses, critic observability, micro-batching, padding.

No I/O, no trainer state; shared by the local and the verl trainers (shapes in each docstring).
"""
