"""What a job holds on each device: the engines' memory models (`model`), the activations a
model's code keeps (`activations`, from the fake-tensor probe), the caching allocator's pools
(`allocator`) and yafsdp's buffer layout (`yafsdp_layout`). Nothing here reads the time model."""
