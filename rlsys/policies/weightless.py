"""The learner-facing half of the Policy contract for policies without weights of their own (a hosted
model, the random baseline): nothing to train, nothing to publish. Importing it costs no torch."""


class WeightlessPolicy:
    def parameters(self) -> list:
        return []

    def train(self) -> None:
        pass

    def eval(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}
