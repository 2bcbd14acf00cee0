"""GeRA: the geometrically regularised aligner, its losses and the neighbourhood graph they use."""
