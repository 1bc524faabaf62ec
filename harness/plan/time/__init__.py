"""How long a step takes: kernels and compute (`kernels`, `compute`), the network's collectives
(`network`), each engine's kernel sequence (`programs/`), the stream simulator (`simulate`,
`streams`, `handout`, `give_way`), its terms (`mechanisms`, `timing`) and `--cycle`."""
