# Sourced by the GPU suites that run pytest: where the image has no pytest, install it from the
# wheels carried in .whl/pytest into /tmp/site and put that on PYTHONPATH (no network there).
if ! python3 -c "import pytest" 2>/dev/null && ls .whl/pytest/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/pytest/*.whl
  export PYTHONPATH=${PYTHONPATH:-}:/tmp/site
fi
