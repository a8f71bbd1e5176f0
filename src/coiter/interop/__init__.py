"""Tensors in and out of coiter: files (Matrix Market, FROSTT, Rutherford-Boeing, coiter's
``.npz``) and other libraries' arrays (pydata/sparse, torch). These build :class:`~coiter.Tensor`
objects, so they sit above :mod:`coiter.tensor`; the formats they fill sit below it."""
