"""Qdrant: the reader and writer (store), the live store, names and their checks, the publish
recovery, and bulk loading.
"""
