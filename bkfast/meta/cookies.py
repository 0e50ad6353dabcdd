"""Bookie cookies (spec §5.5, Java `Cookie.java`): text format, files, ZooKeeper, checks, `bookieformat`.

A cookie ties a bookie id to its journal/ledger/index directories and to the cluster's instance id.
It is stored in ``<dir>/current/VERSION`` of every journal, ledger and index directory and in
``<root>/cookies/<bookieId>``. Blocking kazoo calls: use from a thread, not the reactor.

A bookie without a metadata service (`bkfast bookie --no-metadata`) keeps only the files: its cookie has
no instanceId, its directories are checked against them on every start (`check_local_cookies`), and the
first start with a metadata service adopts them (writes the cluster's cookie everywhere).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from typing import Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from bkfast.errors import CookieError, CookieMismatchError

from .zk_layout import AVAILABLE, COOKIES, READONLY, read_instance_id, zk_path

__all__ = [
    "Cookie", "CookieError", "CookieMismatchError", "COOKIE_LAYOUT_VERSION", "VERSION_FILENAME",
    "cookie_for_conf", "encode_dirs", "decode_dirs", "read_cookie_file", "write_cookie_file",
    "read_zk_cookie", "write_zk_cookie", "delete_zk_cookie", "check_or_create_cookies", "format_bookie",
    "bookie_dirs", "BookieDirs", "check_local_cookies", "CookieStore", "ZkCookieStore", "check_cookies",
    "format_bookie_in",
]

COOKIE_LAYOUT_VERSION = 5
VERSION_FILENAME = "VERSION"
CURRENT_DIR = "current"


def encode_dirs(dirs) -> str:
    """``<count>`` then TAB + dir for each dir (Java `Cookie.encodeDirPaths`)."""
    return "\t".join([str(len(dirs)), *dirs])


def decode_dirs(text: str) -> list[str]:
    parts = text.split("\t")
    try:
        n = int(parts[0])
    except ValueError:
        raise CookieError(f"invalid directory list {text!r} in cookie") from None
    if n != len(parts) - 1:
        raise CookieError(f"invalid directory list {text!r} in cookie: count {n} but {len(parts) - 1} dirs")
    return parts[1:]


# -- protobuf text format, written the way Java's TextFormat does --------------------------------------

_JAVA_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v",
                 0x5C: "\\\\", 0x27: "\\'", 0x22: '\\"'}
_UNESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 0x5C, "'": 0x27, '"': 0x22,
              "?": 0x3F}


def _java_escape(s: str) -> str:
    out = []
    for b in s.encode("utf-8"):
        if b in _JAVA_ESCAPES:
            out.append(_JAVA_ESCAPES[b])
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append("\\%03o" % b)
    return "".join(out)


def _unescape(s: str) -> str:
    out = bytearray()
    i = 0
    raw = s.encode("utf-8")
    while i < len(raw):
        c = raw[i]
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(raw):
            raise CookieError("invalid escape at end of string in cookie")
        e = chr(raw[i])
        if e in _UNESCAPES:
            out.append(_UNESCAPES[e])
            i += 1
        elif e in "01234567":
            j = i
            while j < len(raw) and j < i + 3 and chr(raw[j]) in "01234567":
                j += 1
            out.append(int(raw[i:j], 8) & 0xFF)
            i = j
        elif e in "xX":
            j = i + 1
            while j < len(raw) and j < i + 3 and chr(raw[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(raw[i + 1:j], 16))
            i = j
        else:
            raise CookieError(f"invalid escape \\{e} in cookie")
    return out.decode("utf-8")


_FIELDS = ("bookieHost", "journalDir", "ledgerDirs", "instanceId", "indexDirs")


def _parse_text_format(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or len(value) < 2 or value[0] not in "\"'" or value[-1] != value[0]:
            raise CookieError(f"invalid cookie line {line!r}")
        if name not in _FIELDS:
            raise CookieError(f"unknown field {name!r} in cookie")
        fields[name] = _unescape(value[1:-1])
    return fields


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str | None = None
    index_dirs: tuple[str, ...] | None = None
    layout_version: int = COOKIE_LAYOUT_VERSION

    # Encoded forms, as stored (and compared) by Java.
    @property
    def journal_dir_text(self) -> str:
        return ",".join(self.journal_dirs)

    @property
    def ledger_dirs_text(self) -> str:
        return encode_dirs(self.ledger_dirs)

    @property
    def index_dirs_text(self) -> str | None:
        return encode_dirs(self.index_dirs) if self.index_dirs is not None else None

    def to_text(self) -> str:
        if self.layout_version <= 3:
            lines = [str(self.layout_version), self.bookie_id, self.journal_dir_text, self.ledger_dirs_text]
            return "\n".join(lines) + "\n"
        out = [f"{self.layout_version}\n"]
        for name, value in (("bookieHost", self.bookie_id), ("journalDir", self.journal_dir_text),
                            ("ledgerDirs", self.ledger_dirs_text), ("instanceId", self.instance_id),
                            ("indexDirs", self.index_dirs_text)):
            if value is not None:
                out.append(f'{name}: "{_java_escape(value)}"\n')
        return "".join(out)

    def to_bytes(self) -> bytes:
        return self.to_text().encode("utf-8")

    @classmethod
    def parse(cls, data: bytes | str) -> "Cookie":
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        first, _, rest = text.partition("\n")
        try:
            version = int(first.strip())
        except ValueError:
            raise CookieError(f"invalid cookie: first line {first!r} is not a layout version") from None
        if version == 3:
            lines = rest.split("\n")
            if len(lines) < 3:
                raise CookieError("invalid version 3 cookie: expected bookie id, journal dir and ledger dirs lines")
            return cls(lines[0], tuple(lines[1].split(",")), tuple(decode_dirs(lines[2])), layout_version=3)
        if version not in (4, 5):
            raise CookieError(f"unsupported cookie layout version {version} (supported: 3, 4, 5)")
        f = _parse_text_format(rest)
        missing = [n for n in ("bookieHost", "journalDir", "ledgerDirs") if n not in f]
        if missing:
            raise CookieError(f"invalid cookie: missing {', '.join(missing)}")
        return cls(
            bookie_id=f["bookieHost"],
            journal_dirs=tuple(f["journalDir"].split(",")),
            ledger_dirs=tuple(decode_dirs(f["ledgerDirs"])),
            instance_id=f.get("instanceId"),
            index_dirs=tuple(decode_dirs(f["indexDirs"])) if "indexDirs" in f else None,
            layout_version=version,
        )

    def differences(self, other: "Cookie", dirs_only: bool = False) -> list[str]:
        """What differs, as ``"<field>: cookie says X, this bookie has Y"`` (self = stored, other = expected),
        a changed journal dir list also naming the dirs missing from, or new in, the configuration.
        `dirs_only`: compare the directory lists alone (a bookie without a metadata service)."""
        diffs = []
        for label, a, b in (("bookieId", self.bookie_id, other.bookie_id),
                            ("journalDirs", self.journal_dir_text, other.journal_dir_text),
                            ("ledgerDirs", self.ledger_dirs_text, other.ledger_dirs_text),
                            ("indexDirs", self.index_dirs_text, other.index_dirs_text),
                            ("instanceId", self.instance_id, other.instance_id)):
            if dirs_only and label in ("bookieId", "instanceId"):
                continue
            if a != b:
                diff = f"{label}: cookie says {a}, this bookie has {b}"
                if label == "journalDirs":
                    diff += _journal_dir_change(self.journal_dirs, other.journal_dirs)
                diffs.append(diff)
        return diffs


def _journal_dir_change(stored, configured) -> str:
    missing = [d for d in stored if d not in configured]
    added = [d for d in configured if d not in stored]
    parts = ([f"missing journal director{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}"]
             if missing else [])
    parts += [f"new journal director{'y' if len(added) == 1 else 'ies'} {', '.join(added)}"] if added else []
    if not parts:
        return " (same directories, another order: each ledger's journal would change)"
    return f" ({'; '.join(parts)}: a journal directory cannot be removed or added, its entries would be lost)"


# -- configuration ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BookieDirs:
    """The directories a cookie lists: journal, ledger, and index dirs (None when indexDirectories is not set:
    the index lives in the ledger dirs, and the cookie says nothing of it, as Java's)."""

    journal: tuple[str, ...]
    ledger: tuple[str, ...]
    index: tuple[str, ...] | None

    @classmethod
    def from_conf(cls, conf) -> BookieDirs:
        index = tuple(conf.get("indexDirectories")) if conf.is_set("indexDirectories") else None
        return cls(tuple(conf.get("journalDirectories")), tuple(conf.get("ledgerDirectories")), index)

    def all(self) -> list[str]:
        """Every directory that holds a cookie: journal, ledger, then index dirs, no repeats."""
        return list(dict.fromkeys((*self.journal, *self.ledger, *(self.index or ()))))


def bookie_dirs(conf) -> list[str]:
    """Every directory of the configuration that holds a cookie (`BookieDirs.all`)."""
    return BookieDirs.from_conf(conf).all()


def cookie_for_conf(conf, bookie_id: str, instance_id: str | None) -> Cookie:
    dirs = BookieDirs.from_conf(conf)
    return Cookie(bookie_id, dirs.journal, dirs.ledger, instance_id, dirs.index)


# -- files -----------------------------------------------------------------------------------------------

def _version_path(directory: str) -> str:
    return os.path.join(directory, CURRENT_DIR, VERSION_FILENAME)


def read_cookie_file(directory: str) -> Cookie | None:
    """The cookie in ``<directory>/current/VERSION``, or None if there is none."""
    path = _version_path(directory)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return Cookie.parse(data)
    except CookieError as e:
        raise CookieError(f"{path}: {e}") from None


def write_cookie_file(directory: str, cookie: Cookie) -> str:
    """Write ``<directory>/current/VERSION`` atomically (temp file, fsync, rename); returns the path."""
    cur = os.path.join(directory, CURRENT_DIR)
    os.makedirs(cur, exist_ok=True)
    path = os.path.join(cur, VERSION_FILENAME)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(cookie.to_bytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        # A full (or read-only, or forbidden) directory: no VERSION.tmp stays behind, and the error names
        # the file (a failed write or fsync carries no file name of its own).
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if err.filename is None:
            raise OSError(err.errno, err.strerror, path) from err
        raise
    return path


def _write_cookie_files(dirs: list[str], cookie: Cookie, previous: dict) -> None:
    """Write `cookie` in every dir or in none: when one cannot be written (a full disk), the dirs written
    before it get their `previous` cookie back (None: theirs is removed), so that once there is room the
    next start finds the directories as this one did instead of refusing a cookie in some of them only."""
    written = []
    try:
        for d in dirs:
            write_cookie_file(d, cookie)
            written.append(d)
    except OSError:
        for d in written:
            with contextlib.suppress(OSError):
                if previous.get(d) is None:
                    os.unlink(_version_path(d))
                else:
                    write_cookie_file(d, previous[d])
        raise


# -- ZooKeeper -------------------------------------------------------------------------------------------

def _zk_cookie_path(root: str, bookie_id: str) -> str:
    return zk_path(root, COOKIES, bookie_id)


def read_zk_cookie(zk, root: str, bookie_id: str) -> tuple[Cookie, int] | None:
    """(cookie, znode version) from ``<root>/cookies/<bookieId>``, or None."""
    try:
        data, stat = zk.get(_zk_cookie_path(root, bookie_id))
    except NoNodeError:
        return None
    try:
        return Cookie.parse(data), stat.version
    except CookieError as e:
        raise CookieError(f"ZooKeeper cookie {_zk_cookie_path(root, bookie_id)}: {e}") from None


def write_zk_cookie(zk, root: str, bookie_id: str, cookie: Cookie, version: int | None = None) -> int:
    """Create the ZK cookie (`version` None) or compare-and-set it at `version`; returns the new version."""
    path = _zk_cookie_path(root, bookie_id)
    try:
        if version is None:
            zk.ensure_path(zk_path(root, COOKIES))
            zk.create(path, cookie.to_bytes())
            return 0
        return zk.set(path, cookie.to_bytes(), version=version).version
    except NodeExistsError:
        raise CookieError(f"cookie {path} already exists (written concurrently?)") from None
    except BadVersionError:
        raise CookieError(f"cookie {path} changed concurrently (version {version} is stale)") from None
    except NoNodeError:
        raise CookieError(f"cookie {path} does not exist (deleted concurrently?)") from None


def delete_zk_cookie(zk, root: str, bookie_id: str, version: int = -1) -> bool:
    try:
        zk.delete(_zk_cookie_path(root, bookie_id), version=version)
        return True
    except NoNodeError:
        return False


# -- startup check and bookieformat ----------------------------------------------------------------------

class CookieStore(Protocol):
    """Where a metadata store keeps bookie cookies: ZooKeeper (`ZkCookieStore`) or etcd
    (`bkfast.meta.etcd_cluster.EtcdCookieStore`). Versions are the store's own (a znode version, a mod revision)."""

    store_name: str

    def where(self, bookie_id: str) -> str: ...

    def instance_id(self) -> str | None: ...

    def init_hint(self) -> str: ...

    def read(self, bookie_id: str) -> tuple[Cookie, int] | None: ...

    def write(self, bookie_id: str, cookie: Cookie, version: int | None = None) -> int: ...

    def delete(self, bookie_id: str, version: int = -1) -> bool: ...

    def exists(self, bookie_id: str) -> bool: ...

    def registered(self, bookie_id: str) -> bool:
        """Whether a bookie with this id is registered: a running bookie's cookie must not change under it."""
        ...


class ZkCookieStore:
    """Cookies at ``<root>/cookies/<bookieId>`` on a started kazoo client."""

    store_name = "ZooKeeper"

    def __init__(self, zk, root: str):
        self.zk, self.root = zk, root

    def where(self, bookie_id: str) -> str:
        return _zk_cookie_path(self.root, bookie_id)

    def instance_id(self) -> str | None:
        return read_instance_id(self.zk, self.root)

    def init_hint(self) -> str:
        return f"{zk_path(self.root, 'INSTANCEID')} does not exist"

    def read(self, bookie_id: str) -> tuple[Cookie, int] | None:
        return read_zk_cookie(self.zk, self.root, bookie_id)

    def write(self, bookie_id: str, cookie: Cookie, version: int | None = None) -> int:
        return write_zk_cookie(self.zk, self.root, bookie_id, cookie, version)

    def delete(self, bookie_id: str, version: int = -1) -> bool:
        return delete_zk_cookie(self.zk, self.root, bookie_id, version)

    def exists(self, bookie_id: str) -> bool:
        return self.zk.exists(_zk_cookie_path(self.root, bookie_id)) is not None

    def registered(self, bookie_id: str) -> bool:
        paths = (zk_path(self.root, AVAILABLE, bookie_id), zk_path(self.root, AVAILABLE, READONLY, bookie_id))
        return any(self.zk.exists(p) is not None for p in paths)


def check_or_create_cookies(zk, root: str, conf, bookie_id: str) -> Cookie:
    """`check_cookies` against ZooKeeper's cookie at ``<root>/cookies/<bookieId>``."""
    return check_cookies(ZkCookieStore(zk, root), conf, bookie_id)


def check_cookies(store: CookieStore, conf, bookie_id: str) -> Cookie:
    """Java's `checkEnvironment`: a new bookie gets its cookie written everywhere; an existing one must
    find identical cookies (bookie id, dirs, instance id) in every directory and in the metadata store."""
    instance_id = store.instance_id()
    if instance_id is None:
        raise CookieError(f"cluster not initialized: {store.init_hint()} (run `bkfast shell initnewcluster`)")
    expected = cookie_for_conf(conf, bookie_id, instance_id)
    dirs = bookie_dirs(conf)
    local = {d: read_cookie_file(d) for d in dirs}
    stored = store.read(bookie_id)
    have = [d for d, c in local.items() if c is not None]
    missing = [d for d, c in local.items() if c is None]
    name, where = store.store_name, store.where(bookie_id)

    if stored is None and not have:
        _write_cookie_files(dirs, expected, local)
        store.write(bookie_id, expected)
        return expected
    if stored is None and not missing and all(c.instance_id is None for c in local.values() if c is not None):
        # Written by this bookie without a metadata service: adopt them if the directories still match.
        _refuse_changed_dirs(bookie_id, {_version_path(d): local[d] for d in dirs}, expected)
        _write_cookie_files(dirs, expected, local)
        store.write(bookie_id, expected)
        return expected
    if stored is None:
        raise CookieError(
            f"bookie {bookie_id}: directories {', '.join(have)} hold a cookie but {name} has none at "
            f"{where} (metadata was formatted or this is another cluster); "
            "run `bkfast shell bookieformat` to wipe this bookie")
    if not have:
        raise CookieError(
            f"bookie {bookie_id}: {name} has a cookie at {where} but none of its "
            f"directories ({', '.join(dirs)}) has one (data lost or directories changed); "
            "recover the directories or run `bkfast shell bookieformat` and re-replicate")
    found = [(f"{name} {where}", stored[0])]
    found += [(_version_path(d), c) for d, c in local.items() if c is not None]
    _refuse_mismatch(bookie_id, found, expected)
    if missing:
        raise CookieError(f"bookie {bookie_id}: no cookie in directories {', '.join(missing)} "
                          f"(cookies found in {', '.join(have)})")
    return expected


def _refuse_mismatch(bookie_id: str, found: list[tuple[str, Cookie]], expected: Cookie) -> None:
    # Differences first: a directory added to the configuration has no cookie, and the mismatch names it.
    problems = [f"{where}: {diff}" for where, c in found for diff in c.differences(expected)]
    if problems:
        raise CookieMismatchError(f"bookie {bookie_id}: cookie mismatch:\n  " + "\n  ".join(problems))


def _refuse_changed_dirs(bookie_id: str, cookies: dict, expected: Cookie) -> None:
    """One line: each distinct difference once, then the cookie files that show it."""
    found: dict[str, list[str]] = {}
    for where, c in cookies.items():
        for diff in c.differences(expected, dirs_only=True):
            found.setdefault(diff, []).append(where)
    if found:
        raise CookieMismatchError(f"bookie {bookie_id}: cookie mismatch: " + "; ".join(
            f"{diff} [{', '.join(places)}]" for diff, places in found.items()))


def check_local_cookies(conf, bookie_id: str) -> Cookie:
    """A bookie without a metadata service: the cookie files alone, directories only.

    No cookie anywhere (a new bookie, or one from before cookies were kept without metadata): write one
    (no instanceId) in every directory. Otherwise every cookie found must list this bookie's journal,
    ledger and index directories (a Java bookie's cookies included); the bookie id and instance id are not
    compared. A directory without a cookie next to ones with a cookie is refused: it is new or was wiped.
    """
    expected = cookie_for_conf(conf, bookie_id, None)
    dirs = bookie_dirs(conf)
    local = {d: read_cookie_file(d) for d in dirs}
    have = {_version_path(d): c for d, c in local.items() if c is not None}
    if not have:
        _write_cookie_files(dirs, expected, local)
        return expected
    _refuse_changed_dirs(bookie_id, have, expected)
    missing = [d for d, c in local.items() if c is None]
    if missing:
        raise CookieError(f"bookie {bookie_id}: no cookie in directories {', '.join(missing)} (cookies found "
                          f"in {', '.join(d for d, c in local.items() if c is not None)}): a new or wiped "
                          "directory; restore it, or wipe the bookie")
    return expected


def _wipe_dir(directory: str) -> None:
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        p = os.path.join(directory, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def format_bookie(zk, root: str, conf, bookie_id: str, force: bool = False) -> list[str]:
    """`format_bookie_in` on ZooKeeper's cookies (none when `zk` is None: the directories alone)."""
    return format_bookie_in(ZkCookieStore(zk, root) if zk is not None else None, conf, bookie_id, force)


def format_bookie_in(store: CookieStore | None, conf, bookie_id: str, force: bool = False) -> list[str]:
    """BookKeeper's `bookieformat`: wipe this bookie's journal/ledger/index dirs and delete its cookie in the
    metadata store. Without `force`, refuses when any directory holds data or the store holds the cookie.
    Returns the actions taken."""
    dirs = bookie_dirs(conf)
    nonempty = [d for d in dirs if os.path.isdir(d) and os.listdir(d)]
    stored = store is not None and store.exists(bookie_id)
    if not force and (nonempty or stored):
        what = ([f"directories {', '.join(nonempty)} hold data"] if nonempty else []) + \
               ([f"{store.store_name} has cookie {store.where(bookie_id)}"] if store is not None and stored else [])
        raise CookieError(f"bookie {bookie_id} is not empty ({'; '.join(what)}); pass --force to wipe it")
    actions = []
    for d in dirs:
        if os.path.isdir(d):
            _wipe_dir(d)
            actions.append(f"wiped {d}")
    if store is not None and store.delete(bookie_id):
        actions.append(f"deleted cookie {store.where(bookie_id)}")
    return actions
