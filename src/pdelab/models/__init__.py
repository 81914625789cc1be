"""The shared backbone (transformer.py), its mechanisms and the attention-kernel registry.

Importing the package imports nothing heavy: options.py is read, torch-free, when params.yaml
is validated. The model factory (factory.py) imports the kernels, the papers' included.
"""
