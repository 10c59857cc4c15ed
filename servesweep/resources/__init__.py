"""What a cell runs on: software stacks (built or adopted, probed from inside) and models."""
