"""The migrate command's work: which rows to encode, the calibration that puts encoded and
translated rows on one scale, and the migration itself.
"""
