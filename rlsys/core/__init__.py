"""The ground floor: the data model, the env and evaluator contracts, action grammars, prompt templates."""
