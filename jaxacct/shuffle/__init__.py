"""Amplification by shuffling: clone bounds, variation-ratio pairs, exact
randomized-response profiles and the shuffle front door (work in progress)."""
