"""Mechanics shared by the database engines (PostgreSQL, Chroma, Qdrant): backup and journal
names, resume points, and the checks at the engine's edge.
"""
