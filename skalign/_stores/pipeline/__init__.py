"""The translation pipeline: a store read batch by batch, translated and written to a shadow
that is verified and published (streaming, verification).
"""
