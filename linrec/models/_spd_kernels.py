"""In-place recursive Cholesky, triangular inverse and LᵀL product on the lower triangle of a
square Fortran-order matrix, in BLAS-3 (the kernels of linrec.models.linalg.spd_inverse).

scipy's f2py wrappers (`scipy.linalg.blas.dgemm`, ...) take whole arrays and copy any block that
is not contiguous, so they cannot update a block of a larger matrix in place. scipy also exports
every BLAS/LAPACK routine as a C function pointer (`scipy.linalg.cython_blas` /
`cython_lapack`, the documented Cython API); called through ctypes with a pointer into the
matrix and its leading dimension, a routine reads and writes any block where it lies: no copy,
no temporary, only OpenBLAS's own packing buffers.

Each kernel splits its triangle in two (at a multiple of `block`) and recurses:

* Cholesky A = L Lᵀ:  L11 = chol(A11);  L21 = A21 L11⁻ᵀ;  A22 -= L21 L21ᵀ;  L22 = chol(A22).
* inverse X = L⁻¹:    X11 = L11⁻¹;  X22 = L22⁻¹;  X21 = -X22 L21 X11.
* LᵀL (LAPACK's LAUUM) of M = X:  R11 = X11ᵀX11 + X21ᵀX21;  R21 = X22ᵀX21;  R22 = X22ᵀX22.

The triangular solves and products (`?trsm`, `?trmm`) and the symmetric rank-k updates
(`?syrk`) recurse the same way, so that all but O(n²·block) of the n³ flops are `?gemm` calls on
large blocks. Only blocks of at most `block` rows go to `?potrf`, `?trtri`, `?lauum` and `?syrk`
(and triangles of at most `block` rows to `?trsm`, `?trmm`): OpenBLAS's threaded `?syrk`, which
its threaded `?potrf` and `?lauum` call on the trailing matrix, overflows a fixed packing buffer
when the output has many rows (see linrec.models.linalg); its threaded `?gemm`, `?trsm` and
`?trmm` walk the output in slices of a bounded width and do not.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np
from scipy.linalg import cython_blas, cython_lapack

_CHAR = ctypes.POINTER(ctypes.c_char)
_INT = ctypes.POINTER(ctypes.c_int)
_PTR = ctypes.c_void_p
#: argument kinds of each routine ("s": pointer to a scalar of the matrix dtype)
_SIGNATURES = {
    "gemm": (cython_blas, (_CHAR, _CHAR, _INT, _INT, _INT, "s", _PTR, _INT, _PTR, _INT, "s",
                           _PTR, _INT)),
    "syrk": (cython_blas, (_CHAR, _CHAR, _INT, _INT, "s", _PTR, _INT, "s", _PTR, _INT)),
    "trsm": (cython_blas, (_CHAR, _CHAR, _CHAR, _CHAR, _INT, _INT, "s", _PTR, _INT, _PTR, _INT)),
    "trmm": (cython_blas, (_CHAR, _CHAR, _CHAR, _CHAR, _INT, _INT, "s", _PTR, _INT, _PTR, _INT)),
    "potrf": (cython_lapack, (_CHAR, _INT, _PTR, _INT, _INT)),
    "potri": (cython_lapack, (_CHAR, _INT, _PTR, _INT, _INT)),
    "trtri": (cython_lapack, (_CHAR, _CHAR, _INT, _PTR, _INT, _INT)),
    "lauum": (cython_lapack, (_CHAR, _INT, _PTR, _INT, _INT)),
}
_SCALARS = {np.dtype(np.float32): ("s", ctypes.c_float),
            np.dtype(np.float64): ("d", ctypes.c_double)}
_FLAGS = {flag: ctypes.c_char(flag.encode()) for flag in "LRNTU"}


class LapackInfoError(ArithmeticError):
    """A LAPACK routine returned info > 0 on a diagonal block: `index` is the 1-based position in
    the whole matrix (for `potrf`, the order of the leading minor that is not positive)."""

    def __init__(self, routine: str, index: int) -> None:
        super().__init__(f"{routine}: info {index}")
        self.routine, self.index = routine, index


_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@cache
def _routine(dtype: np.dtype, name: str) -> ctypes._CFuncPtr:
    """The C function of BLAS/LAPACK routine `name` for `dtype` (e.g. dgemm), from scipy."""
    prefix, scalar = _SCALARS[dtype]
    module, kinds = _SIGNATURES[name]
    capsule = module.__pyx_capi__[prefix + name]
    address = _capsule_pointer(capsule, _capsule_name(capsule))
    argtypes = [ctypes.POINTER(scalar) if kind == "s" else kind for kind in kinds]
    return ctypes.CFUNCTYPE(None, *argtypes)(address)  # ctypes releases the GIL in the call


def _flag(flag: str):
    return ctypes.byref(_FLAGS[flag])


def _int(value: int):
    return ctypes.byref(ctypes.c_int(value))


class _Blocks:
    """Blocks of the lower triangle of one square Fortran-order matrix, and the recursions."""

    def __init__(self, F: np.ndarray, block: int) -> None:
        if F.ndim != 2 or F.shape[0] != F.shape[1] or not F.flags.f_contiguous:
            raise ValueError(f"need a square Fortran-order matrix, got shape {F.shape}")
        if F.dtype not in _SCALARS:
            raise ValueError(f"need float32 or float64, got {F.dtype}")
        self.F, self.n, self.block = F, F.shape[0], max(1, int(block))
        self.base, self.itemsize = F.ctypes.data, F.itemsize
        self.ld = _int(max(1, self.n))
        scalar = _SCALARS[F.dtype][1]
        self.one, self.minus_one = ctypes.byref(scalar(1.0)), ctypes.byref(scalar(-1.0))
        self.call = {name: _routine(F.dtype, name) for name in _SIGNATURES}

    def at(self, i: int, j: int) -> ctypes.c_void_p:
        """Pointer to element (i, j)."""
        return ctypes.c_void_p(self.base + (i + j * self.n) * self.itemsize)

    def split(self, m: int) -> int:
        """Size of the first half of a triangle of m > block rows: a multiple of `block`."""
        return self.block * max(1, round(m / (2 * self.block)))

    def lapack(self, name: str, offset: int, m: int, *flags: str, uplo: str = "L") -> None:
        info = ctypes.c_int(0)
        self.call[name](_flag(uplo), *map(_flag, flags), _int(m), self.at(offset, offset),
                        self.ld, ctypes.byref(info))
        if info.value > 0:
            raise LapackInfoError(name, offset + info.value)
        if info.value < 0:  # pragma: no cover - an argument error is a bug in this module
            raise RuntimeError(f"{name}: illegal argument {-info.value}")

    def gemm(self, trans_a: str, trans_b: str, m: int, n: int, k: int, alpha,
             a: tuple[int, int], b: tuple[int, int], c: tuple[int, int]) -> None:
        """C += alpha op(A) op(B) for the blocks at a, b, c (C is m x n, inner size k)."""
        self.call["gemm"](_flag(trans_a), _flag(trans_b), _int(m), _int(n), _int(k), alpha,
                          self.at(*a), self.ld, self.at(*b), self.ld, self.one, self.at(*c),
                          self.ld)

    def syrk(self, trans: str, c0: int, p: int, a0: int, k: int, alpha) -> None:
        """Lower triangle of the p x p block C at (c0, c0) += alpha S, S = A Aᵀ (trans "N", A the
        p x k block at (c0, a0)) or S = Aᵀ A (trans "T", A the k x p block at (a0, c0))."""
        if p <= self.block:
            a = self.at(c0, a0) if trans == "N" else self.at(a0, c0)
            self.call["syrk"](_flag("L"), _flag(trans), _int(p), _int(k), alpha, a, self.ld,
                              self.one, self.at(c0, c0), self.ld)
            return
        q = self.split(p)
        self.syrk(trans, c0, q, a0, k, alpha)
        if trans == "N":
            self.gemm("N", "T", p - q, q, k, alpha, (c0 + q, a0), (c0, a0), (c0 + q, c0))
        else:
            self.gemm("T", "N", p - q, q, k, alpha, (a0, c0 + q), (a0, c0), (c0 + q, c0))
        self.syrk(trans, c0 + q, p - q, a0, k, alpha)

    def solve_right_transposed(self, r: int, c: int, m: int, t: int, tri: int) -> None:
        """B <- B L⁻ᵀ for the m x t block B at (r, c) and the t x t lower L at (tri, tri)."""
        if t <= self.block:
            self.call["trsm"](_flag("R"), _flag("L"), _flag("T"), _flag("N"), _int(m), _int(t),
                              self.one, self.at(tri, tri), self.ld, self.at(r, c), self.ld)
            return
        q = self.split(t)
        self.solve_right_transposed(r, c, m, q, tri)
        self.gemm("N", "T", m, t - q, q, self.minus_one, (r, c), (tri + q, tri), (r, c + q))
        self.solve_right_transposed(r, c + q, m, t - q, tri + q)

    def multiply_left(self, r: int, c: int, t: int, w: int, tri: int, alpha) -> None:
        """B <- alpha L B for the t x w block B at (r, c) and the t x t lower L at (tri, tri)."""
        if t <= self.block:
            self.call["trmm"](_flag("L"), _flag("L"), _flag("N"), _flag("N"), _int(t), _int(w),
                              alpha, self.at(tri, tri), self.ld, self.at(r, c), self.ld)
            return
        q = self.split(t)
        self.multiply_left(r + q, c, t - q, w, tri + q, alpha)
        self.gemm("N", "N", t - q, w, q, alpha, (tri + q, tri), (r, c), (r + q, c))
        self.multiply_left(r, c, q, w, tri, alpha)

    def multiply_right(self, r: int, c: int, w: int, t: int, tri: int) -> None:
        """B <- B L for the w x t block B at (r, c) and the t x t lower L at (tri, tri)."""
        if t <= self.block:
            self.call["trmm"](_flag("R"), _flag("L"), _flag("N"), _flag("N"), _int(w), _int(t),
                              self.one, self.at(tri, tri), self.ld, self.at(r, c), self.ld)
            return
        q = self.split(t)
        self.multiply_right(r, c, w, q, tri)
        self.gemm("N", "N", w, q, t - q, self.one, (r, c + q), (tri + q, tri), (r, c))
        self.multiply_right(r, c + q, w, t - q, tri + q)

    def multiply_left_transposed(self, r: int, c: int, t: int, w: int, tri: int) -> None:
        """B <- Lᵀ B for the t x w block B at (r, c) and the t x t lower L at (tri, tri)."""
        if t <= self.block:
            self.call["trmm"](_flag("L"), _flag("L"), _flag("T"), _flag("N"), _int(t), _int(w),
                              self.one, self.at(tri, tri), self.ld, self.at(r, c), self.ld)
            return
        q = self.split(t)
        self.multiply_left_transposed(r, c, q, w, tri)
        self.gemm("T", "N", q, w, t - q, self.one, (tri + q, tri), (r + q, c), (r, c))
        self.multiply_left_transposed(r + q, c, t - q, w, tri + q)

    def cholesky(self, o: int, m: int) -> None:
        """Lower triangle of the m x m diagonal block at (o, o) <- its Cholesky factor L."""
        if m <= self.block:
            self.lapack("potrf", o, m)
            return
        h = self.split(m)
        self.cholesky(o, h)
        self.solve_right_transposed(o + h, o, m - h, h, o)
        self.syrk("N", o + h, m - h, o, h, self.minus_one)
        self.cholesky(o + h, m - h)

    def invert(self, o: int, m: int) -> None:
        """Lower triangle of the m x m diagonal block at (o, o) <- its inverse."""
        if m <= self.block:
            self.lapack("trtri", o, m, "N")
            return
        h = self.split(m)
        self.invert(o, h)
        self.invert(o + h, m - h)
        self.multiply_left(o + h, o, m - h, h, o + h, self.minus_one)
        self.multiply_right(o + h, o, m - h, h, o)

    def lower_gram(self, o: int, m: int) -> None:
        """Lower triangle of the m x m diagonal block M at (o, o) <- that of MᵀM."""
        if m <= self.block:
            self.lapack("lauum", o, m)
            return
        h = self.split(m)
        self.lower_gram(o, h)
        self.syrk("T", o, h, o + h, m - h, self.one)
        self.multiply_left_transposed(o + h, o, m - h, h, o + h)
        self.lower_gram(o + h, m - h)


def cholesky_lower(F: np.ndarray, block: int) -> None:
    """Lower triangle of the SPD Fortran-order F <- L with F = L Lᵀ (upper triangle: scratch)."""
    _Blocks(F, block).cholesky(0, F.shape[0])


def invert_lower(F: np.ndarray, block: int) -> None:
    """Lower triangle of F (lower triangular, Fortran order) <- its inverse."""
    _Blocks(F, block).invert(0, F.shape[0])


def lower_gram(F: np.ndarray, block: int) -> None:
    """Lower triangle of F <- lower triangle of MᵀM, M the lower triangle of F."""
    _Blocks(F, block).lower_gram(0, F.shape[0])


def spd_inverse_lower(F: np.ndarray, block: int) -> None:
    """Lower triangle of the SPD Fortran-order F <- lower triangle of F⁻¹ = L⁻ᵀ L⁻¹, recursively
    with blocks of `block` rows at the leaves. The upper triangle is used as scratch."""
    blocks = _Blocks(F, block)
    blocks.cholesky(0, blocks.n)
    blocks.invert(0, blocks.n)
    blocks.lower_gram(0, blocks.n)


def lapack_spd_inverse_upper(F: np.ndarray) -> None:
    """Upper triangle of the SPD Fortran-order F <- upper triangle of F⁻¹ by one `?potrf` and one
    `?potri` call on the whole matrix (in place; the lower triangle is left untouched). The upper
    factor (F = UᵀU) is the one linrec's fits have used since its first release: the same bits."""
    blocks = _Blocks(F, F.shape[0])
    blocks.lapack("potrf", 0, blocks.n, uplo="U")
    blocks.lapack("potri", 0, blocks.n, uplo="U")
