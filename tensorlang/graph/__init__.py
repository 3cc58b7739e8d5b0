"""The graph layer (operators, autodiff, executor): not implemented yet."""
