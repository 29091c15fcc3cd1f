"""Experiments that run the real Moses toolkit around rescorer (the paper's Table 1).

Import rule: this package may import every other part of rescorer, and nothing imports it; it
never imports torch itself (training and scoring run as ``rescorer`` subprocesses, as a user
would run them), so a driver process stays small while Moses and the tuner work.
"""
