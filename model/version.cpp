namespace strata {
const char* version() {
  return "0.1.0";
}
}  // namespace strata
