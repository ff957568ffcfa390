"""Rank processes: the long-lived pool (fork server, FileStore rendezvous, failure reporting), what the fork server
preloads, the pytest plugin that starts it early and marks the cases on ranks, Megatron's model-parallel state inside
a rank, and a real GPTModel on CPU.

May import ``harness.targets``; nothing here knows about subjects or cases.
"""
