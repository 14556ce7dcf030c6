"""CUDA tests, by behaviour: exchanges through the fake driver (test_exchange), stream and
context ordering under the strict fake (test_ordering), the CUDA stream values both ways
(test_stream_values), hostile CUDA input (test_hostile_input), and a real GPU (test_real_gpu).
Only the driver is faked (dlpack.tests.fake_cuda), as strict as libcuda."""
