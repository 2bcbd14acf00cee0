"""Aligned embedding-space ensembles: the orthogonal ensemble aligner, the Karcher mean on the
orthogonal group, and the helpers that stack and split views.
"""
