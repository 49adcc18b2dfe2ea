# The Debian package of the paralab program: `cpack -G DEB` in the build folder, or `make
# package` at the top. Its paralab starts on any Debian-like machine with the Depends below:
# the CUDA runtime is linked statically, and cuBLAS, cuDNN and NCCL are opened at first use
# (kernels/CMakeLists.txt), so the CUDA libraries are only suggested; without them (or without
# a driver) the GPU paths say why and the CPU runs as in a CPU-only build.
set(CPACK_GENERATOR "DEB")
# cpack installs what is built, without building everything first (the Makefiles' preinstall
# step would rebuild every test program: `make package` builds paralab, the one program
# installed, and the package test runs from a built tree).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(CPACK_PACKAGE_NAME "paralab")
set(CPACK_PACKAGE_VENDOR "ParaLab")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Laboratory for parallel neural-network training")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_INSTALL_DIRECTORY "paralab")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "ParaLab developers")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "Design a model, choose devices (GPUs, or virtual CPU devices) and a parallel strategy,\n\
and watch loss, throughput, memory and a timeline of compute against communication,\n\
live and per device. Every run is kept so that strategies can be compared side by side.\n\
Runs on the CPU everywhere; NVIDIA GPUs are used where a driver and the CUDA libraries\n\
are installed.")
# Depends: dpkg-shlibdeps over the installed programs (Qt 6 widgets, sqlite3, OpenBLAS,
# oneDNN, Open MPI, ...). It finds no CUDA library to depend on: none is linked.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Plus the window's platform plugins (xcb, wayland), which the program loads rather than links.
if(PARALAB_GUI)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "qt6-qpa-plugins")
endif()
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
# The data sets of the examples (Fashion-MNIST; the text set's default corpus).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, fortunes")
# The optional CUDA libraries, each opened at its first use: the driver's libcuda.so.1 (Debian's
# libcuda1; NVIDIA's driver packages provide it too), and cuBLAS, cuDNN and NCCL of this CUDA
# version by the names of NVIDIA's repository (cuBLAS also by Debian's).
if(PARALAB_HAVE_CUDA)
  set(_cuda_major ${CUDAToolkit_VERSION_MAJOR})
  set(_cuda_minor ${CUDAToolkit_VERSION_MINOR})
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS
      "libcuda1, libcublas-${_cuda_major}-${_cuda_minor} | libcublas${_cuda_major}, libcudnn9-cuda-${_cuda_major}, libnccl2")
endif()

install(FILES ${PROJECT_SOURCE_DIR}/resources/io.paralab.ParaLab.desktop DESTINATION share/applications)
install(FILES ${PROJECT_SOURCE_DIR}/resources/io.paralab.ParaLab.metainfo.xml DESTINATION share/metainfo)
install(FILES ${PROJECT_SOURCE_DIR}/resources/paralab-mime.xml DESTINATION share/mime/packages
        RENAME io.paralab.ParaLab.xml)
install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/paralab.svg
        DESTINATION share/icons/hicolor/scalable/apps RENAME io.paralab.ParaLab.svg)
foreach(size 48 128)
  install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/paralab-${size}.png
          DESTINATION share/icons/hicolor/${size}x${size}/apps RENAME io.paralab.ParaLab.png)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/resources/examples/ DESTINATION share/paralab/examples
        FILES_MATCHING PATTERN "*.paralab.json")
include(CPack)
