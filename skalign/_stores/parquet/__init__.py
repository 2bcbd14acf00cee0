"""Parquet files and folders: the reader and writers (store), the live store, and footer
handling.
"""
