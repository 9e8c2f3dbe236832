# Sourced by install_prime_rl.sh --archives VENDOR ($DIR, $COMMIT, $VENDOR set; `say`, `die` defined): DIR made
# from prime-rl's source archive instead of a git clone, for machines without GitHub (CI: ../shared/vendor,
# whose README lists the archives). The git dependencies of the lock come from the same folder:
#   torchtitan   the lock's revision, unpacked into DIR/.air-deps/ (PRIME_RL_TORCHTITAN, unless set);
#   verifiers    classic: the lock's revision (PRIME_RL_VERIFIERS, unless set); v1: the deps/verifiers
#                submodule's commit (an archive has no git to ask: SUBMODULE_VERIFIERS below), unpacked there.
# Sets head and target to the commit. DIR records which archive made it (DIR/.air-archive): a DIR made from
# another commit, or not from an archive, is refused rather than mixed.

# prime-rl commit -> the commit of its deps/verifiers submodule and the version hatch-vcs would derive from
# git there (`git describe`: v0.3.0-62 -> 0.3.1.dev62); a source archive carries neither.
declare -A SUBMODULE_VERIFIERS=([559b447]="a60a606 0.3.1.dev62")

[[ -d "$VENDOR" ]] || die "--archives $VENDOR: no such folder"
[[ "$COMMIT" =~ ^[0-9a-f]{7,40}$ ]] || die "--archives needs a commit hash (--commit), not '$COMMIT'"
short=${COMMIT:0:7}
archive="$VENDOR/prime-rl-$short.tar.gz"
[[ -f "$archive" ]] || die "no $archive (prime-rl archives in $VENDOR: $(cd "$VENDOR" && ls prime-rl-*.tar.gz 2>/dev/null | tr '\n' ' '))"

# Unpacks VENDOR/NAME-REV.tar.gz (one folder, NAME/) to DEST unless DEST is there; DEST appears whole or not at all.
unpack_archive() { # NAME REV DEST
    local file="$VENDOR/$1-${2:0:7}.tar.gz" dest=$3 tmp
    [[ -e "$dest" ]] && return 0
    [[ -f "$file" ]] || die "no $file (the lock of prime-rl $short takes $1 at ${2:0:12})"
    tmp=$(mktemp -d "$(dirname "$dest")/.unpack.XXXXXX")
    tar -xzf "$file" -C "$tmp" || { rm -rf "$tmp"; die "cannot unpack $file"; }
    [[ -d "$tmp/$1" ]] || { rm -rf "$tmp"; die "$file holds no $1/ folder"; }
    mv "$tmp/$1" "$dest" && rmdir "$tmp"
}

if [[ -e "$DIR" ]]; then
    [[ -f "$DIR/.air-archive" ]] || die "$DIR exists and was not made from an archive; remove it or pass another DIR"
    made_from=$(cat "$DIR/.air-archive")
    [[ "${made_from:0:7}" == "$short" ]] || die "$DIR was made from prime-rl $made_from, not $short; remove it or pass another DIR"
    echo "    $DIR was made from $archive before: kept"
else
    say "unpacking $archive into $DIR"
    unpack_archive prime-rl "$short" "$DIR"
    echo "$COMMIT" >"$DIR/.air-archive" # the commit as asked (air reads it where there is no git)
fi
head=$COMMIT target=$COMMIT

# The lock's git revisions of torchtitan and (classic) verifiers.
read -r titan_rev verifiers_rev <<<"$(python3 - "$DIR/uv.lock" <<'PY'
import sys, tomllib
revs = {"torchtitan": "-", "verifiers": "-"}
for package in tomllib.load(open(sys.argv[1], "rb")).get("package", []):
    git = package.get("source", {}).get("git", "")
    if package["name"] in revs and "#" in git:
        revs[package["name"]] = git.rsplit("#", 1)[1]
print(revs["torchtitan"], revs["verifiers"])
PY
)" || die "cannot read $DIR/uv.lock"
mkdir -p "$DIR/.air-deps"
if [[ -z "${PRIME_RL_TORCHTITAN:-}" && "$titan_rev" != - ]]; then
    unpack_archive torchtitan "$titan_rev" "$DIR/.air-deps/torchtitan-${titan_rev:0:7}"
    export PRIME_RL_TORCHTITAN="$DIR/.air-deps/torchtitan-${titan_rev:0:7}"
fi
if [[ -z "${PRIME_RL_VERIFIERS:-}" && "$verifiers_rev" != - ]]; then
    unpack_archive verifiers "$verifiers_rev" "$DIR/.air-deps/verifiers-${verifiers_rev:0:7}"
    export PRIME_RL_VERIFIERS="$DIR/.air-deps/verifiers-${verifiers_rev:0:7}"
fi
if [[ -f "$DIR/.gitmodules" ]] && grep -q 'path = deps/verifiers' "$DIR/.gitmodules"; then
    [[ -n "${SUBMODULE_VERIFIERS[$short]:-}" ]] ||
        die "prime-rl $short's deps/verifiers submodule commit is unknown to this script (SUBMODULE_VERIFIERS)"
    read -r sub_rev sub_version <<<"${SUBMODULE_VERIFIERS[$short]}"
    if [[ ! -f "$DIR/deps/verifiers/pyproject.toml" ]]; then
        rmdir "$DIR/deps/verifiers" 2>/dev/null || true
        unpack_archive verifiers "$sub_rev" "$DIR/deps/verifiers"
    fi
    export PRIME_RL_VERIFIERS_COMMIT=$sub_rev
    # hatch-vcs asks git for verifiers' version; with no git it would say 0.0.0, which prime-rl's deps refuse.
    export SETUPTOOLS_SCM_PRETEND_VERSION=$sub_version
fi
echo "    at $short from $archive (torchtitan ${titan_rev:0:7}, verifiers ${PRIME_RL_VERIFIERS_COMMIT:-${verifiers_rev:0:7}} from $VENDOR)"
