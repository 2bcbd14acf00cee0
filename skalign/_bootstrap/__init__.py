"""Anchor bootstrapping: the bootstrapper and its stages (inputs, discovery rounds, seedless
self-learning, refinement, certificate, validation guard) with the matching, Sinkhorn and
signature tools they use.
"""
