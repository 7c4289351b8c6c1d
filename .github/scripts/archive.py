#!/usr/bin/env python3
"""Writes a reproducible .tar.gz of one directory (the release workflow's archives).

    archive.py OUT.tar.gz DIR

Entries are sorted, owned by 0:0 without user or group names, dated SOURCE_DATE_EPOCH
(required), with mode 0755 for executables and 0644 otherwise; the gzip header carries no
name and no time. The same files give the same bytes on Linux and macOS, whatever tar the
runner has.
"""
import gzip
import os
import sys
import tarfile


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out, top = sys.argv[1], sys.argv[2].rstrip("/")
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch.isdigit():
        print(f"archive.py: SOURCE_DATE_EPOCH must be set to seconds, got {epoch!r}", file=sys.stderr)
        return 2
    mtime = int(epoch)
    if not os.path.isdir(top):
        print(f"archive.py: {top} is not a directory", file=sys.stderr)
        return 2
    base = os.path.dirname(top)
    paths = [top]
    for root, dirs, files in os.walk(top):
        dirs.sort()
        paths += [os.path.join(root, d) for d in dirs]
        paths += [os.path.join(root, f) for f in sorted(files)]

    def entry(path: str) -> tarfile.TarInfo:
        info = tarfile.TarInfo(os.path.relpath(path, base) if base else path)
        st = os.lstat(path)
        if os.path.isdir(path):
            info.type, info.mode = tarfile.DIRTYPE, 0o755
        elif os.path.isfile(path) and not os.path.islink(path):
            info.size = st.st_size
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
        else:
            raise SystemExit(f"archive.py: {path}: only files and directories are archived")
        info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
        return info

    with open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(paths):
                info = entry(path)
                if info.isdir():
                    tar.addfile(info)
                else:
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
