"""Affine translations fitted on pairs: orthogonal Procrustes, ridge regression, and the norm
handling they share.
"""
