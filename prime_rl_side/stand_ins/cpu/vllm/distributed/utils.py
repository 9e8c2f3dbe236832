class StatelessProcessGroup:
    @classmethod
    def create(cls, *args, **kwargs):
        raise NotImplementedError("NCCL weight broadcast needs GPUs; this is the CPU rehearsal's stand-in")
