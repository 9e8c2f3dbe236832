"""Import-only stand-in for verifiers (see ../README.md): every name and submodule raises
NotImplementedError when used."""

from _air_stand_in import make_stand_in

make_stand_in(__name__)
