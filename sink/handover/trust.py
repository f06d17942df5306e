"""What a directory outside the store must be before the job writes into it or reads back from it.

A directory another local user can write to (or that another user owns) lets them swap, add or
redirect what we read back: a batch file, Spark's record of the offsets read, an exported record.
These checks are made on the opened directory (``fstat`` of a descriptor), never on a name that
could be replaced between the check and the use; where the job keeps using a directory, it keeps
the descriptor and opens files relative to it.
"""

from __future__ import annotations

import os
import pwd
import stat


class UntrustedPathError(ValueError):
    """A path the job would write or read through could be changed by another user; the message
    says which, why, and what to do."""


def user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def writable_by_others(st: os.stat_result) -> bool:
    """Group or other write permission."""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def open_dir(path: str, what: str) -> int:
    """A descriptor of the directory ``path`` (its last component no symbolic link)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise UntrustedPathError(f"{what} {path} is a symbolic link: give the directory it points to") from None
        raise UntrustedPathError(f"{what} {path}: {exc.strerror or exc}") from None


def check_private(st: os.stat_result, path: str, what: str) -> None:
    """Ours and writable by no one else: what only we can change."""
    me = os.geteuid()
    if st.st_uid != me:
        raise UntrustedPathError(f"{what} {path} belongs to {user_name(st.st_uid)}, not to {user_name(me)} who runs "
                                 f"the job: another user made it; remove it or name a directory of yours")
    if writable_by_others(st):
        raise UntrustedPathError(f"{what} {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
                                 f"chmod go-w it, or name a directory only you can write")


def check_ours_or_sticky(st: os.stat_result, path: str, what: str) -> None:
    """Ours and writable by no one else, or a shared directory with the sticky bit owned by us or
    root (like /tmp): there no one else can remove or rename a file of ours, so files created in it
    with O_EXCL, mode 0600 and checked by owner when read back cannot be swapped."""
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if sticky and writable_by_others(st):
        if st.st_uid not in (os.geteuid(), 0):
            raise UntrustedPathError(f"{what} {path} is a shared directory owned by {user_name(st.st_uid)}, who may "
                                     f"remove or rename any file in it: name a directory of yours")
        return
    if writable_by_others(st):
        raise UntrustedPathError(f"{what} {path} is writable by other users without the sticky bit (mode "
                                 f"{stat.S_IMODE(st.st_mode):04o}): they could replace the files in it; chmod go-w "
                                 f"or +t it, or name a directory only you can write")
    check_private(st, path, what)


def mkdir_private(path: str, what: str) -> None:
    """Make ``path`` (absolute), mode 0700, unless it exists (its parents as usual): made by us before
    anyone else can make it in a shared parent."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UntrustedPathError(f"{what} {path}: cannot create it: {exc.strerror or exc}") from None


def make_private_dir(path: str, what: str) -> int:
    """Create ``path`` (mode 0700) unless it exists, then a descriptor of it once it is checked to be
    ours and writable by no one else; tightened to 0700 if it was readable by others."""
    mkdir_private(path, what)
    fd = open_dir(path, what)
    try:
        st = os.fstat(fd)
        check_private(st, path, what)
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_existing_dir(path: str, what: str, private: bool) -> None:
    """The checks ``make_private_dir`` (``private``) or a shared directory's (check_ours_or_sticky)
    would make, on a directory that exists; nothing is created. Run before Spark starts."""
    if not os.path.lexists(path):
        return
    fd = open_dir(path, what)
    try:
        (check_private if private else check_ours_or_sticky)(os.fstat(fd), path, what)
    finally:
        os.close(fd)
