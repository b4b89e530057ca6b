"""Files a user names, read and written without surprises.

Reading: only a regular file is opened (a FIFO would block the open or the read forever, a
device never ends, a socket cannot be opened), decided from ``stat`` before any open, and
checked again on the open descriptor. Writing (``write_atomically``): a temporary file in the
target's folder, renamed over it, so the old file stays whole until the new one is; only a
regular file is ever replaced (never a device, a pipe or a folder, and a symlink's target only
when that is a regular file), with the mode a new file gets from the umask or the replaced
file's own; a signal (SIGTERM, SIGHUP, Ctrl-C) mid-write leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from transformer_calc.errors import PresetError, TcalcError

# what a file that is not a regular one is, by its stat type
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def kind(mode: int) -> str:
    """'a pipe', 'a device', ... for a stat mode that is not a regular file's."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path, where: str, expected: str) -> BinaryIO:
    """``path`` opened for binary reading when it is a regular file (symlinks followed);
    PresetError naming ``where`` and what was ``expected`` otherwise."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise PresetError(f"{where}: no such file") from None
    except OSError as e:
        raise PresetError(f"{where}: cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise PresetError(f"{where}: {kind(mode)}, not a regular file; expected {expected}")
    # O_NONBLOCK: were the path swapped for a FIFO since the stat, the open returns at once
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise PresetError(f"{where}: cannot read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PresetError(f"{where}: {kind(mode)}, not a regular file; expected {expected}")
    return os.fdopen(fd, "rb")


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def lfs_pointer(path: Path) -> bool:
    """A git-lfs pointer (a small text file standing for a large one a clone did not fetch),
    as git-lfs writes it (docs/spec.md: its first line names the spec)."""
    try:
        if os.stat(path).st_size > 1024:
            return False
        with open_regular(path, str(path), "a file") as f:
            return f.read(len(LFS_POINTER)) == LFS_POINTER
    except (OSError, TcalcError):
        return False


def read_bounded(path: Path, where: str, expected: str, limit: int) -> bytes:
    """A regular file's bytes, refused (before reading) when over ``limit`` bytes."""
    with open_regular(path, where, expected) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise PresetError(f"{where}: {size:,} bytes, over the {limit:,}-byte limit for "
                              f"{expected}")
        data = f.read(limit + 1)  # at most the limit, whatever the file grows to meanwhile
    if len(data) > limit:
        raise PresetError(f"{where}: over the {limit:,}-byte limit for {expected}")
    return data


def _umask_mode() -> int:
    """The mode a new file gets: 0o666 less the process's umask (read without changing it
    where /proc says it, else set and restored at once)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _target(out: Path, source: Path, force: bool) -> tuple[Path, os.stat_result | None]:
    """Where the new file goes (a symlink's final target) and the file it replaces (None: a
    new file). Raises TcalcError for everything tcalc will not replace."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return out, None
    except OSError as e:
        raise TcalcError(f"{out}: cannot write: {e.strerror or e}") from None
    target = out
    if stat.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(out))
        try:  # (the link itself followed: /proc/self/fd/1 is the pipe, not a path)
            st = os.stat(out)
        except FileNotFoundError:  # a dangling link: its target is created
            if not force:
                raise TcalcError(f"{out}: exists (a symlink); use --force to write its "
                                 "target") from None
            return target, None
        except OSError as e:
            raise TcalcError(f"{out}: cannot write: {e.strerror or e}") from None
        if not stat.S_ISREG(st.st_mode):
            raise TcalcError(f"{out}: a symlink to {kind(st.st_mode)}; tcalc replaces "
                             "regular files only")
    elif not stat.S_ISREG(st.st_mode):
        raise TcalcError(f"{out}: {kind(st.st_mode)}; tcalc replaces regular files only")
    with contextlib.suppress(OSError):
        if os.path.samefile(target, source):
            raise TcalcError(f"{out}: is the input file; choose another output")
    if not force:
        raise TcalcError(f"{out}: exists; use --force to replace it")
    return target, st


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) for the duration, as Ctrl-C raises
    KeyboardInterrupt, so the cleanup below runs; the previous handlers come back after."""
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            with contextlib.suppress(ValueError, OSError):  # (not the main thread)
                previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def write_atomically(out: Path, text: str, *, source: Path, force: bool) -> None:
    """Write ``text`` (UTF-8) to ``out`` through a temporary file beside it and a rename: the
    old file stays whole until the new one is complete, and a failure (a full disk, a signal)
    leaves neither a truncated file nor the temporary one."""
    import tempfile

    target, old = _target(out, source, force)
    folder = target.parent if str(target.parent) else Path(".")
    with _signals_raise():
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tcalc-", suffix=".tmp", dir=folder)
        except OSError as e:
            raise TcalcError(f"{out}: cannot write: {e.strerror or e}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                # a new file's mode from the umask; a replaced one keeps its mode and owner
                os.fchmod(f.fileno(), _umask_mode() if old is None else old.st_mode & 0o777)
                if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    with contextlib.suppress(OSError):  # (only root may give a file away)
                        os.fchown(f.fileno(), old.st_uid, old.st_gid)
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            # the target may have changed since it was looked at: never rename over a
            # special file that appeared meanwhile
            with contextlib.suppress(FileNotFoundError):
                now = os.lstat(target).st_mode
                if not stat.S_ISREG(now):
                    raise TcalcError(f"{out}: {kind(now)}; tcalc replaces regular files only")
            os.replace(tmp, target)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise TcalcError(f"{out}: cannot write: {e.strerror or e}") from None
        except BaseException:  # a signal, Ctrl-C, an error above: nothing left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
