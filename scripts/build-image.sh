#!/usr/bin/env bash
# Builds an OCI image archive of the release binary without a container
# engine or a registry (docs/image.md):
#
#   scripts/build-image.sh [--binary PATH] [--output PATH]
#
# Writes target/image/clusterset-dns-<version>.oci.tar, an oci-archive (a tar
# of an OCI image layout: oci-layout, index.json, blobs/sha256/...) with one
# layer holding only:
#   /usr/local/bin/clusterset-dns          the stripped binary (the entrypoint)
#   its runtime libraries, from `ldd`, and the dynamic loader (PT_INTERP)
#   /usr/share/doc/<package>/copyright    the licences of those libraries
#   /etc/passwd, /etc/group                root and nonroot (65532), no shell
#   /etc/nsswitch.conf, /tmp, /home/nonroot
#   /etc/clusterset-dns/                   the example config and clusterset, for
#                                          `serve --config /etc/clusterset-dns/clusterset-dns.toml`
# User 65532:65532 (as deploy/*.yaml), entrypoint the binary, `serve` as the
# default argument, and the org.opencontainers.image.* labels.
#
# Options:
#   --binary PATH  package this binary instead of running
#                  `cargo build --release --locked` (which is a no-op when
#                  target/release/clusterset-dns, or under $CARGO_TARGET_DIR,
#                  is up to date)
#   --output PATH  where to write the archive
#
# Environment:
#   SOURCE_DATE_EPOCH  image creation time (label, config `created`, every
#                      file's mtime); default: the commit time of HEAD. The
#                      same binary and epoch give a byte-identical archive.
#   IMAGE_SOURCE       org.opencontainers.image.source; default: the URL of
#                      the `origin` remote, else `unknown` (with a warning)
#   IMAGE_NAME         name containerd gives the image on import
#                      (io.containerd.image.name), default clusterset-dns
#   IMAGE_TAG          its tag, default the crate version
#
# Needs bash, python3, ldd, strip and git (for the default epoch); with dpkg,
# the libraries' copyright files are included.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'build-image: ERROR: %s\n' "$*" >&2; exit 1; }
log() { printf 'build-image: %s\n' "$*" >&2; }

binary=""
output=""
while (($#)); do
	case $1 in
	--binary) binary=${2:?--binary needs a path}; shift 2 ;;
	--output) output=${2:?--output needs a path}; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
		exit 0
		;;
	*) die "unknown argument: $1 (try --help)" ;;
	esac
done

for tool in python3 ldd strip; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done

if [ -z "$binary" ]; then
	log "cargo build --release --locked"
	# Without the variables some dependencies' build scripts track but that
	# are not about the binary (the image's epoch; OUT_DIR when run from a
	# test): they would make this build and a plain one rebuild each other.
	env -u SOURCE_DATE_EPOCH -u OUT_DIR cargo build --release --locked >&2
	binary=${CARGO_TARGET_DIR:-target}/release/clusterset-dns
fi
[ -x "$binary" ] || die "$binary is not an executable file"

# The binary says what it is: the labels come from the same facts as
# `clusterset-dns version` and the build_info metric.
info=$("$binary" version) || die "$binary version failed"
version=$(sed -n 's/^clusterset-dns //p' <<<"$info")
commit=$(sed -n 's/^commit: //p' <<<"$info")
target=$(sed -n 's/^target: //p' <<<"$info")
[ -n "$version" ] && [ -n "$commit" ] && [ -n "$target" ] || die "unexpected \`version\` output: $info"

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) ||
		die "SOURCE_DATE_EPOCH is unset and there is no git commit to take the time from"
fi
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970: $SOURCE_DATE_EPOCH"

if [ -z "${IMAGE_SOURCE:-}" ]; then
	IMAGE_SOURCE=$(git remote get-url origin 2>/dev/null || true)
	if [ -z "$IMAGE_SOURCE" ]; then
		log "warning: no IMAGE_SOURCE and no origin remote: org.opencontainers.image.source=unknown"
		IMAGE_SOURCE=unknown
	fi
fi

case ${target%%-*} in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) die "no OCI architecture known for target $target" ;;
esac

output=${output:-target/image/clusterset-dns-$version.oci.tar}
mkdir -p "$(dirname "$output")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

strip -o "$work/clusterset-dns" "$binary"

# Runtime files: "<source on this machine> <path in the image>" per line.
# Libraries go where ldd found them and the loader where PT_INTERP points,
# the very paths the binary will look in.
{
	printf '%s %s\n' "$work/clusterset-dns" /usr/local/bin/clusterset-dns
	ldd "$work/clusterset-dns" | awk '
		$2 == "=>" && $3 ~ /^\// { print $3 }
		$1 ~ /^\// { print $1 }' | sort -u | while read -r lib; do
		printf '%s %s\n' "$(readlink -f "$lib")" "$lib"
		if command -v dpkg >/dev/null 2>&1; then
			package=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1) || true
			if [ -n "$package" ] && [ -f "/usr/share/doc/$package/copyright" ]; then
				printf '%s %s\n' "/usr/share/doc/$package/copyright" "/usr/share/doc/$package/copyright"
			fi
		fi
	done
	printf '%s %s\n' config/clusterset-dns.toml /etc/clusterset-dns/clusterset-dns.toml
	printf '%s %s\n' config/example-clusterset.yaml /etc/clusterset-dns/example-clusterset.yaml
} | sort -u -k2,2 >"$work/files"
grep -q ' /lib64/\| /lib/ld-' "$work/files" || die "ldd found no dynamic loader: $(cat "$work/files")"

python3 - "$work/files" "$output" "$version" "$commit" "$SOURCE_DATE_EPOCH" \
	"$IMAGE_SOURCE" "$arch" "${IMAGE_NAME:-clusterset-dns}" "${IMAGE_TAG:-$version}" <<'PYTHON'
"""Writes the layer, config, manifest and index of the OCI image layout and
tars them into an oci-archive, every byte a function of the inputs."""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time

files, output, version, commit, epoch, source, arch, name, tag = sys.argv[1:]
epoch = int(epoch)
created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
UID = GID = 65532


def entry(path, kind, mode, uid=0, gid=0, size=0):
    info = tarfile.TarInfo(path.lstrip("/"))
    info.type, info.mode, info.uid, info.gid, info.size = kind, mode, uid, gid, size
    info.mtime, info.uname, info.gname = epoch, "", ""
    return info


def layer_tar():
    """The root filesystem, entries sorted, owners and times fixed."""
    passwd = (
        "root:x:0:0:root:/root:/sbin/nologin\n"
        f"nonroot:x:{UID}:{GID}:nonroot:/home/nonroot:/sbin/nologin\n"
    )
    group = f"root:x:0:\nnonroot:x:{GID}:\n"
    content = {
        "/etc/passwd": (passwd.encode(), 0o644),
        "/etc/group": (group.encode(), 0o644),
        "/etc/nsswitch.conf": (b"passwd: files\ngroup: files\nhosts: files dns\n", 0o644),
    }
    with open(files) as f:
        for line in f:
            src, dst = line.split()
            with open(src, "rb") as data:
                executable = os.stat(src).st_mode & 0o111
                content[dst] = (data.read(), 0o755 if executable else 0o644)
    dirs = {"/tmp": (0o1777, 0, 0), "/home/nonroot": (0o700, UID, GID)}
    for path in list(content) + list(dirs):
        parent = os.path.dirname(path)
        while parent != "/":
            dirs.setdefault(parent, (0o755, 0, 0))
            parent = os.path.dirname(parent)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(set(content) | set(dirs)):
            if path in dirs:
                mode, uid, gid = dirs[path]
                tar.addfile(entry(path, tarfile.DIRTYPE, mode, uid, gid))
            else:
                data, mode = content[path]
                tar.addfile(entry(path, tarfile.REGTYPE, mode, size=len(data)), io.BytesIO(data))
    return buf.getvalue()


blobs = {}


def blob(data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


labels = {
    "org.opencontainers.image.title": "clusterset-dns",
    "org.opencontainers.image.description": "Authoritative DNS server and controller for "
    "the Kubernetes Multi-Cluster Services API (clusterset.local)",
    "org.opencontainers.image.licenses": "Apache-2.0",
    "org.opencontainers.image.version": version,
    "org.opencontainers.image.revision": commit,
    "org.opencontainers.image.source": source,
    "org.opencontainers.image.created": created,
}
tar_bytes = layer_tar()
gz = io.BytesIO()
with gzip.GzipFile(fileobj=gz, mode="wb", mtime=epoch, compresslevel=9, filename="") as z:
    z.write(tar_bytes)
layer = blob(gz.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip")
config = blob(
    canonical(
        {
            "created": created,
            "architecture": arch,
            "os": "linux",
            "config": {
                "User": f"{UID}:{GID}",
                "Entrypoint": ["/usr/local/bin/clusterset-dns"],
                "Cmd": ["serve"],
                "Env": ["PATH=/usr/local/bin"],
                "WorkingDir": "/",
                "Labels": labels,
            },
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()],
            },
            "history": [{"created": created, "created_by": "scripts/build-image.sh"}],
        }
    ),
    "application/vnd.oci.image.config.v1+json",
)
manifest = blob(
    canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config,
            "layers": [layer],
            "annotations": labels,
        }
    ),
    "application/vnd.oci.image.manifest.v1+json",
)
manifest["platform"] = {"architecture": arch, "os": "linux"}
manifest["annotations"] = {
    "org.opencontainers.image.ref.name": tag,
    "io.containerd.image.name": f"docker.io/library/{name}:{tag}" if "/" not in name else f"{name}:{tag}",
}
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [manifest],
}

layout = {
    "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
    "index.json": canonical(index),
}
for digest, data in blobs.items():
    layout["blobs/sha256/" + digest.split(":")[1]] = data
tmp = output + ".tmp"
with tarfile.open(tmp, mode="w", format=tarfile.USTAR_FORMAT) as archive:
    for path in ["blobs", "blobs/sha256"]:
        archive.addfile(entry(path, tarfile.DIRTYPE, 0o755))
    for path in sorted(layout):
        data = layout[path]
        archive.addfile(entry(path, tarfile.REGTYPE, 0o644, size=len(data)), io.BytesIO(data))
os.replace(tmp, output)
print(manifest["digest"])
PYTHON
log "wrote $output ($(du -h "$output" | cut -f1); ${IMAGE_NAME:-clusterset-dns}:${IMAGE_TAG:-$version})"
echo "$output"
