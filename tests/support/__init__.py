"""What tests share: helpers written once (importable as ``support.<module>``: tests/ is on the path)."""
