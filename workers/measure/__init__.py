"""Measuring honestly: the timing loops (`harness`), their statistics (`stats`), the
correctness check (`correctness`, with the one fault-injection setting in `faults`), the
one publish step that builds every run (`publish`), a worker's own ceilings
(`ceilings`) and profiler traces (`profile`).
"""
