"""Notes on disk: the notes IO manager, versions, the codec, tables and file manifests."""
