"""What the fleet's commands raise when they cannot go on: one line, naming the file or node at fault."""


class FleetError(Exception):
    pass
