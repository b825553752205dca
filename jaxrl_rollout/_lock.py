"""One writer per run folder: an exclusive `fcntl.flock` on a lock file inside it (standard library only).

`train` holds the lock of its run folder from before it looks at the folder
until it exits, so two `train --out F` started together, or `train --resume F`
while F trains, cannot both write F: the second one is refused with the holder
(pid and host, written into the lock file). The OS releases a flock when its
process ends, however it ends, so the lock file a killed run leaves behind is
no lock at all: the next `train` takes it over. Readers (`evaluate`) take no lock.

The lock file stays in the folder after the run: removing it while another
process may be opening it would let two processes lock two different files.
`FolderLock.acquire` checks that the file it locked is still the one at the
path (a refused command removes the folder it created), and tries again if not.
A folder removed while its run trains takes its lock file with it: `take_again`
locks the file at the path anew before the run writes the folder again.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pathlib
import socket
import time

__all__ = ["LOCK_NAME", "FolderLock", "FolderLocked"]

LOCK_NAME = ".jaxrl_rollout.lock"


class FolderLocked(ValueError):
    """Another process holds the run folder's lock (a ValueError: the command line exits 2)."""


class FolderLock:
    """An exclusive, non-blocking lock on `folder`/.jaxrl_rollout.lock, held until `release`.

    Attributes:
      folder: the run folder.
      created: the lock file did not exist before `acquire` (a refused command removes it).
    """

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        self.path = self.folder / LOCK_NAME
        self.created = False
        self._fd: int | None = None

    def acquire(self, option: str) -> FolderLock:
        """Takes the lock or raises `FolderLocked` naming `option` (e.g. "--out runs/a") and the holder."""
        for _ in range(10):  # the folder can be removed under us by a refused command that created it
            self.created = not self.path.exists()
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:
                self.folder.mkdir(parents=True, exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(fd)
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise FolderLocked(f"{option}: the run folder is in use by {self.holder()}; "
                                   "one train command writes a folder at a time.") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # locked a file that was removed meanwhile: lock the one there now
                os.close(fd)
                continue
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode())
            except OSError as error:  # a full disk: no lock, and no lock file this call made (nor its folder)
                os.close(fd)
                if self.created:
                    self.path.unlink(missing_ok=True)
                raise OSError(error.errno, error.strerror, str(self.path)) from None
            self._fd = fd
            return self
        raise FolderLocked(f"{option}: could not lock the run folder (it keeps being removed).")

    def take_again(self, option: str) -> bool:
        """Locks the file at the path again when it is no longer the one this lock holds (the folder was removed
        while its run trained): True if it did, False while the lock holds the file there (or nothing). Raises
        `FolderLocked` naming the holder when another process locked the file there meanwhile (a new run in a
        folder of the same name); this lock then still holds only its removed file."""
        if self._fd is None:
            return False
        try:
            if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                return False
        except FileNotFoundError:
            pass
        held, self._fd = self._fd, None
        try:
            self.acquire(option)
        except BaseException:
            self._fd = held
            raise
        os.close(held)
        return True

    def holder(self, wait: float = 0.5) -> str:
        """Who holds the lock, as written in the lock file.

        The holder writes its pid just after it takes the lock, so an empty file is
        read again for up to `wait` seconds before it is reported as unknown.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text or time.monotonic() >= deadline:
                return text or "another process (pid and host not yet written)"
            time.sleep(0.02)

    def held_by(self) -> str | None:
        """Who holds the lock now (as `holder` says), or None when nobody does; takes no lock and creates nothing.

        For readers such as `evaluate`, to tell a run that a train is writing from one that stopped.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no lock file (or no folder): nobody holds it
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            return self.holder()
        finally:
            os.close(fd)  # also releases the shared lock if it was taken
        return None

    def release(self, remove: bool = False) -> None:
        """Releases the lock; `remove` deletes the lock file first (for a refused command that created it)."""
        if self._fd is None:
            return
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)  # closing the last descriptor releases the flock
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
