"""prime-rl 559b447 (today's, verifiers v1): the rehearsal's entry (subconfigs, the stand-in trainer), its
trainer entry and the trainer's CPU fixes."""
