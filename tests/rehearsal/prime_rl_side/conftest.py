import sys

from tests.rehearsal.prime_rl_side import PRIME_RL_SIDE

if str(PRIME_RL_SIDE) not in sys.path:
    sys.path.insert(0, str(PRIME_RL_SIDE))
