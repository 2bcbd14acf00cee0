"""Relative representations: anchor choice, the relative projector, ASIF, and inverse relative
projection (IRP) with its decoding and pruning.
"""
