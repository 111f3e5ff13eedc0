from sglang_sim.server import main

if __name__ == "__main__":
    main()
