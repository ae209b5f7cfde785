"""Experimental bounds: published but NOT valid as general upper bounds.

Nothing here is used by the front doors. Each module states the
counterexample that keeps it out of the main namespace.
"""
