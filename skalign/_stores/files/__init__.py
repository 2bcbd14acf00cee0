"""File mechanics shared by the file stores (npy, Parquet, LanceDB, FAISS): atomic files and
shadows, direct I/O, Arrow helpers, and the live stores' overlay of rows written since.
"""
