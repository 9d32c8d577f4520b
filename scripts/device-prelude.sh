# source prelude.sh DEST, on an accelerator host with its own JAX and no network: installs
# the wheels scripts/device-wheels wrote under /tmp (no root needed) and sets PYTHONPATH:
# DEST/first ahead of the host's packages, DEST/rest and the checkout after them. flax and
# optax (the device tier's own models) come from the host's package index when it has one.
_dest=${1:?usage: source prelude.sh DEST}
_install() {
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target "$1" "${@:2}"
}
_install /tmp/boundary-first "$_dest"/first/*.whl && _install /tmp/boundary-rest "$_dest"/rest/*.whl \
  || return 1
if [ -d /opt/pypi/simple ] && ! python3 -c 'import flax, optax' 2>/dev/null; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
    --index-url file:///opt/pypi/simple --target /tmp/boundary-models flax optax >/dev/null 2>&1 \
    || echo "prelude: flax and optax could not be installed; the own-model tests will fail" >&2
fi
export PYTHONPATH=/tmp/boundary-first:${PYTHONPATH:-}:/tmp/boundary-rest:/tmp/boundary-models:$PWD
export PYTHONUNBUFFERED=1
