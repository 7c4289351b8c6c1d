#!/usr/bin/env python3
"""Runs a command with prctl(PR_GET_AUXV) failing (EINVAL), for valgrind-wrap.sh.

Under valgrind, rustix reads the auxiliary vector with PR_GET_AUXV, a raw syscall valgrind
passes to the kernel: it returns valgrind's own vector, whose vDSO address the program
under valgrind cannot read (SIGSEGV in rustix's vDSO set-up). With the call refused,
rustix reads /proc/self/auxv instead, which valgrind answers with the program's own
vector. A seccomp filter, inherited by the exec'd command: `no-pr-get-auxv.py CMD ARGS...`.
"""
import ctypes
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_GET_AUXV = 0x41555856
NR_PRCTL = 157  # x86_64
AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
RET_ERRNO_EINVAL = 0x00050000 | 22


def stmt(code, k):
    return struct.pack("=HBBI", code, 0, 0, k)


def jump(code, k, jt, jf):
    return struct.pack("=HBBI", code, jt, jf, k)


LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
program = b"".join(
    [
        stmt(LD_W_ABS, 4),  # arch
        jump(JEQ_K, AUDIT_ARCH_X86_64, 0, 4),
        stmt(LD_W_ABS, 0),  # syscall number
        jump(JEQ_K, NR_PRCTL, 0, 2),
        stmt(LD_W_ABS, 16),  # args[0], low 32 bits
        jump(JEQ_K, PR_GET_AUXV, 1, 0),
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, RET_ERRNO_EINVAL),
    ]
)
buf = ctypes.create_string_buffer(program, len(program))


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
    sys.exit(f"no-pr-get-auxv: PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
    sys.exit(f"no-pr-get-auxv: seccomp filter: {os.strerror(ctypes.get_errno())}")
os.execvp(sys.argv[1], sys.argv[1:])
