"""The maths: pure functions over numbers and arrays, no Ray and nothing else of the package."""
