"""The DP-SGD privacy statement, where it was first published: it lives in
:mod:`jaxacct.dpsgd` (:func:`jaxacct.dpsgd.statement`); this path keeps working."""

from jaxacct.dpsgd import NEIGHBOURINGS, Comparison, PrivacyStatement, statement  # noqa: F401

__all__ = []
