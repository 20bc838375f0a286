"""The phases (smoke, soak, formal) as numbered steps; they drive a `Trainer` chosen by
`backends.trainer` and never know which one.
"""
