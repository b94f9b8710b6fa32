#include <streampool/streampool.hpp>
#include <thread>
#include <vector>
namespace sp = streampool;

int main() {
  sp::device dev = sp::device::host();  // or sp::device(sp::make_cuda_backend(0))
  sp::pool pool = dev.default_pool();
  sp::array<float> kept;
  std::thread([&] {  // a task with its own stream
    sp::stream s(dev);
    sp::stream_scope on(s);  // array operations on this thread use s
    sp::array<float> a(1024, dev);
    a.fill(1.f);
    kept = a.view(0, 512);  // outlives the thread and its stream
  })
      .join();
  sp::array<float> sums(512, dev);         // main thread, its default stream
  sp::inclusive_scan(sums, kept);          // waits for the dead stream's work: tokens, not streams
  std::vector<float> h = sums.download();  // h[511] == 512
  void* raw = pool.allocate(sp::default_stream(dev), 4096);  // the raw, stream-ordered pool
  pool.deallocate(sp::default_stream(dev), raw);
  return h[511] == 512.f ? 0 : 1;
}
