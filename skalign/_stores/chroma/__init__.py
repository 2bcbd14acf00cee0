"""Chroma: the reader and writer (store), the live store, names and their checks, the publish
recovery, and the HNSW files Chroma keeps on disk.
"""
