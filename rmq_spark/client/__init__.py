"""Talking to the broker: the transport (channels, deadlines, retries, errors) and Admin."""
