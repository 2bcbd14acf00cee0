"""PostgreSQL with pgvector: the reader and writer (store), the live store, the publish
recovery, index rebuilding and COPY loading.
"""
