"""Speculative decoding: proposers, policy and metrics (the plugin is in specdec.plugins)."""
