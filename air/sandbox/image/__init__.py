"""The sandbox image: its recipe (docker/), the Debian base it builds on, and the build."""
